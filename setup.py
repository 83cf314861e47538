"""The one thing pyproject.toml cannot say: the optional compiled cropped JPEG decode.

packer/imaging/_cropjpeg.c links libjpeg-turbo (`-ljpeg`; Debian/Ubuntu:
libjpeg-turbo8-dev or libjpeg62-turbo-dev; Homebrew: jpeg-turbo; conda: libjpeg-turbo).
Its include and library folders come from `pkg-config libjpeg` where pkg-config knows it
(Homebrew and conda install outside the compiler's default paths), else the defaults.
optional=True: where there is no C compiler, no Python headers or no jpeglib.h, the
build skips it and packer.imaging.jpeg.decode_box falls back to simplejpeg's full decode,
cut to the box (the same pixels, slower); `pack info --env` says which one runs.
"""

import shutil
import subprocess

from setuptools import Extension, setup


def pkg_config(*flags: str) -> list[str]:
    """The words `pkg-config FLAGS libjpeg` prints, or none where it cannot tell."""
    if shutil.which("pkg-config") is None:
        return []
    done = subprocess.run(["pkg-config", *flags, "libjpeg"], capture_output=True, text=True,
                          check=False)
    return done.stdout.split() if done.returncode == 0 else []


include_dirs = [word[2:] for word in pkg_config("--cflags-only-I")]
library_dirs = [word[2:] for word in pkg_config("--libs-only-L")]
setup(ext_modules=[Extension("packer.imaging._cropjpeg", ["packer/imaging/_cropjpeg.c"],
                             libraries=["jpeg"], include_dirs=include_dirs,
                             library_dirs=library_dirs, runtime_library_dirs=library_dirs,
                             optional=True)])
