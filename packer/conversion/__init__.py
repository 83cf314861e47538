"""A conversion: the options, the writer loop, the journal that makes it resumable, where
the dataset is written (a local folder, or a URL through a staging folder) and who does
the encoding (threads, processes, a Ray cluster).

Named `conversion`, not `convert`: `packer.convert` is the function users call, and a
subpackage of that name would replace it as an attribute of `packer` once imported.
"""
