"""The pure planning of the readers: which samples each rank and worker reads, in which
order, for an epoch: numpy only (an import-linter contract holds it), seeded, no I/O.

    chunks   chunk spans, the seeded epoch order, ChunkPlan (chunks to ranks and workers)
    groups   GroupPlan: exact per-group counts for Mix and class weights
    elastic  the rest of an epoch a job of one topology left, re-split for another
"""
