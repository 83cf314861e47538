"""The compiled cropped decode (packer/imaging/_cropjpeg.c); optional: see jpeg.decode_box."""

def decode_crop(data: bytes | bytearray | memoryview, top: int, left: int, height: int,
                width: int, scale_denom: int, /) -> bytearray: ...
