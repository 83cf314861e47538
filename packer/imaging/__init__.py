"""Image codecs shared by pack time and train time: Pillow, the libjpeg-turbo fast path,
and the antialiased resize."""
