"""The one thing pyproject.toml cannot say: the optional compiled cropped JPEG decode.

packer/imaging/_cropjpeg.c links libjpeg-turbo (`-ljpeg`; Debian/Ubuntu:
libjpeg-turbo8-dev or libjpeg62-turbo-dev). optional=True: where there is no C compiler,
no Python headers or no jpeglib.h, the build skips it and packer.imaging.jpeg.decode_box
falls back to simplejpeg's full decode, cut to the box (the same pixels, slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("packer.imaging._cropjpeg", ["packer/imaging/_cropjpeg.c"],
                             libraries=["jpeg"], optional=True)])
