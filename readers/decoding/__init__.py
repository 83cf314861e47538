"""Stored bytes to pixels: on the CPU for a sample, fused with a train-time crop, or for a
whole raw batch on a device.

    decode          one sample's bytes to a uint8 tensor or PIL image (size=, mode=)
    crop_decode     a crop drawn by an augment, decoded from only its box
    device_decode   decode_on: a RawBatch decoded on a CUDA device, or on the CPU alike
"""
