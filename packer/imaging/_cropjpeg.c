/* Decode only a box of a JPEG with libjpeg-turbo: rows above it skipped, columns cut to
 * the iMCUs it touches; the rows below it only entropy-decoded (that is what checks
 * them: a damaged file fails whichever box is asked for, as the full decode fails).
 *
 * decode_crop(data, top, left, height, width, scale_denom) -> bytearray of
 * height * width * 3 RGB bytes: the box (in pixels of the image scaled by 1/scale_denom)
 * of the decode of `data` at that scale. Raises ValueError on any libjpeg error or
 * warning (strict, like simplejpeg's strict=True), or a box outside the scaled image.
 * The GIL is released while libjpeg runs.
 *
 * Every jpeg_skip_scanlines call starts on an iMCU-row boundary and the rows between a
 * boundary and the box are read and dropped: libjpeg-turbo before its fix of issue #915
 * (2026-09) returns rows from before the skip, or hangs, for a skip that starts inside
 * a row group (the upsampler still owes that group's rows); from a boundary it is exact
 * in every release. packer.imaging.crop_extension also checks the pixels at import.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#ifndef LIBJPEG_TURBO_VERSION
#error "needs libjpeg-turbo's jpeglib.h (jpeg_skip_scanlines, jpeg_crop_scanline)"
#endif

/* The pixels each side of the box decoded too, so that the edges of the decoded region
 * (where fancy chroma upsampling treats it as the image's edge) lie outside the box. */
#define CROP_MARGIN 2
/* Rows asked of libjpeg per call (it returns at most one row group). */
#define BATCH_ROWS 16

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} strict_error;

typedef struct {
    const unsigned char *data;
    unsigned long size;
    unsigned int top, left, height, width, denom;
    unsigned char *out;
    char message[JMSG_LENGTH_MAX + 64];
} crop_job;

static void strict_error_exit(j_common_ptr cinfo) {
    strict_error *err = (strict_error *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void strict_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0) { /* a warning: corrupt or truncated data */
        strict_error_exit(cinfo);
    }
}

static unsigned int min_uint(unsigned int a, unsigned int b) { return a < b ? a : b; }

/* Output rows per iMCU row at this scale: the unit every skip starts on. */
static JDIMENSION imcu_rows(j_decompress_ptr cinfo) {
#if JPEG_LIB_VERSION >= 70
    return (JDIMENSION)cinfo->max_v_samp_factor * (JDIMENSION)cinfo->min_DCT_v_scaled_size;
#else
    return (JDIMENSION)cinfo->max_v_samp_factor * (JDIMENSION)cinfo->min_DCT_scaled_size;
#endif
}

/* Moves the output to row `target`: whole iMCU rows skipped from a boundary, the rows
 * off a boundary read into `scratch` (BATCH_ROWS rows of the output width) and dropped.
 * Returns 0, or -1 when the image ends before `target`. */
static int advance_to(j_decompress_ptr cinfo, JDIMENSION target, unsigned char *scratch) {
    JDIMENSION unit = imcu_rows(cinfo);
    while (cinfo->output_scanline < target) {
        JDIMENSION at = cinfo->output_scanline;
        JDIMENSION aligned = target - target % unit;
        if (at % unit == 0 && aligned > at) {
            if (jpeg_skip_scanlines(cinfo, aligned - at) == 0) {
                return -1;
            }
        } else {
            JSAMPROW targets[BATCH_ROWS];
            JDIMENSION want = min_uint(BATCH_ROWS, target - at), i;
            want = min_uint(want, unit - at % unit);
            for (i = 0; i < want; i++) {
                targets[i] = scratch + (size_t)i * cinfo->output_width * 3;
            }
            if (jpeg_read_scanlines(cinfo, targets, want) == 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* Runs without the GIL: no Python calls. Returns 0, or -1 with job->message set. */
static int run_crop(crop_job *job) {
    struct jpeg_decompress_struct cinfo;
    strict_error err;
    unsigned char *volatile rows = NULL;
    JDIMENSION xoffset, crop_width, first, last, row, got = 0;
    unsigned int offset;
    int direct;

    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = strict_error_exit;
    err.pub.emit_message = strict_emit_message;
    if (setjmp(err.jump)) {
        snprintf(job->message, sizeof(job->message), "libjpeg: %s", err.message);
        jpeg_destroy_decompress(&cinfo);
        free(rows);
        return -1;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, job->data, job->size);
    jpeg_read_header(&cinfo, TRUE);
    if (cinfo.jpeg_color_space != JCS_YCbCr && cinfo.jpeg_color_space != JCS_GRAYSCALE) {
        snprintf(job->message, sizeof(job->message),
                 "colour space %d is not YCbCr or grayscale", (int)cinfo.jpeg_color_space);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    cinfo.out_color_space = JCS_RGB;
    cinfo.scale_num = 1;
    cinfo.scale_denom = job->denom;
    jpeg_start_decompress(&cinfo);
    if (job->top + job->height > cinfo.output_height ||
        job->left + job->width > cinfo.output_width) {
        snprintf(job->message, sizeof(job->message),
                 "box %ux%u at (%u, %u) is outside the %ux%u image at 1/%u",
                 job->height, job->width, job->top, job->left, cinfo.output_height,
                 cinfo.output_width, job->denom);
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    first = job->left > CROP_MARGIN ? job->left - CROP_MARGIN : 0;
    last = min_uint(job->left + job->width + CROP_MARGIN, cinfo.output_width);
    xoffset = first;
    crop_width = last - first;
    if (crop_width < cinfo.output_width) {
        jpeg_crop_scanline(&cinfo, &xoffset, &crop_width);
    }
    offset = (job->left - xoffset) * 3;
    direct = offset == 0 && cinfo.output_width == job->width;
    rows = malloc((size_t)cinfo.output_width * 3 * BATCH_ROWS);
    if (rows == NULL) {
        snprintf(job->message, sizeof(job->message), "out of memory");
        jpeg_destroy_decompress(&cinfo);
        return -1;
    }
    (void)advance_to(&cinfo, job->top, rows); /* an early end: the read below says so */
    for (row = 0; row < job->height; row += got) {
        JSAMPROW targets[BATCH_ROWS];
        JDIMENSION want = min_uint(BATCH_ROWS, job->height - row), i;
        for (i = 0; i < want; i++) {
            targets[i] = direct ? job->out + (size_t)(row + i) * job->width * 3
                                : rows + (size_t)i * cinfo.output_width * 3;
        }
        got = jpeg_read_scanlines(&cinfo, targets, want);
        if (got == 0) {
            snprintf(job->message, sizeof(job->message),
                     "libjpeg: no rows left at row %u of the box", row);
            jpeg_destroy_decompress(&cinfo);
            free(rows);
            return -1;
        }
        for (i = 0; !direct && i < got; i++) {
            memcpy(job->out + (size_t)(row + i) * job->width * 3, targets[i] + offset,
                   (size_t)job->width * 3);
        }
    }
    /* The rows below the box are entropy-decoded too (skipping short of the end
     * decodes what it skips, no inverse DCT and no colour), then the last row read and
     * the end checked, so data damaged below the box fails as in a full decode,
     * whichever box an epoch draws. */
    if (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW last_row[1];
        last_row[0] = rows;
        (void)advance_to(&cinfo, cinfo.output_height - 1, rows);
        if (jpeg_read_scanlines(&cinfo, last_row, 1) != 1) {
            snprintf(job->message, sizeof(job->message), "libjpeg: the last row is missing");
            jpeg_destroy_decompress(&cinfo);
            free(rows);
            return -1;
        }
    }
    jpeg_finish_decompress(&cinfo);
    free(rows);
    rows = NULL;
    jpeg_destroy_decompress(&cinfo);
    return 0;
}

static PyObject *decode_crop(PyObject *self, PyObject *args) {
    Py_buffer data;
    Py_ssize_t top, left, height, width, denom;
    PyObject *out;
    crop_job job;
    int rc;
    (void)self;

    if (!PyArg_ParseTuple(args, "y*nnnnn:decode_crop", &data, &top, &left, &height, &width,
                          &denom)) {
        return NULL;
    }
    if (denom != 1 && denom != 2 && denom != 4 && denom != 8) {
        PyBuffer_Release(&data);
        PyErr_Format(PyExc_ValueError, "scale_denom must be 1, 2, 4 or 8, not %zd", denom);
        return NULL;
    }
    /* Each side checked before the sums, which could otherwise overflow. */
    if (top < 0 || left < 0 || height < 1 || width < 1 || top > JPEG_MAX_DIMENSION ||
        left > JPEG_MAX_DIMENSION || height > JPEG_MAX_DIMENSION ||
        width > JPEG_MAX_DIMENSION || top + height > JPEG_MAX_DIMENSION ||
        left + width > JPEG_MAX_DIMENSION) {
        PyBuffer_Release(&data);
        PyErr_Format(PyExc_ValueError,
                     "box %zdx%zd at (%zd, %zd) is outside any JPEG (sides 1 to %ld)", height,
                     width, top, left, JPEG_MAX_DIMENSION);
        return NULL;
    }
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)height * width * 3);
    if (out == NULL) {
        PyBuffer_Release(&data);
        return NULL;
    }
    job.data = (const unsigned char *)data.buf;
    job.size = (unsigned long)data.len;
    job.top = (unsigned int)top;
    job.left = (unsigned int)left;
    job.height = (unsigned int)height;
    job.width = (unsigned int)width;
    job.denom = (unsigned int)denom;
    job.out = (unsigned char *)PyByteArray_AS_STRING(out);
    job.message[0] = '\0';
    Py_BEGIN_ALLOW_THREADS
    rc = run_crop(&job);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&data);
    if (rc != 0) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, job.message);
        return NULL;
    }
    return out;
}

static PyMethodDef methods[] = {
    {"decode_crop", decode_crop, METH_VARARGS,
     "decode_crop(data, top, left, height, width, scale_denom) -> bytearray\n\n"
     "The RGB pixels (height * width * 3 bytes) of the box at (top, left) of the JPEG\n"
     "decoded at 1/scale_denom; ValueError on any libjpeg error or warning."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_cropjpeg",
    "Cropped JPEG decode with libjpeg-turbo (packer.imaging.jpeg uses it).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__cropjpeg(void) {
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) {
        return NULL;
    }
    /* The libjpeg-turbo this was built against, as MMMmmmppp (2.1.5: 2001005). */
    if (PyModule_AddIntConstant(mod, "libjpeg_turbo_version", LIBJPEG_TURBO_VERSION_NUMBER) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
