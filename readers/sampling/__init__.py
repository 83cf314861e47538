"""What an epoch draws for a map-style loader, and which samples any plan favours.

    sampler    ChunkSampler: a DDP sampler that permutes chunks, so reads stay local;
               PaddedIndex and PAD_LABEL for the repeats that even out the ranks
    weighted   class and per-sample weights: the epoch plans that draw by them
"""
