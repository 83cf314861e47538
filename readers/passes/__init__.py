"""The passes of the iterable readers: which epoch, rank and worker a pass serves, where it
resumes, who owns the split, and the records it reads.

    base          PartitionPasses: the pass machinery a split reader (PackedIterableDataset, Mix)
                  inherits: one typed initialiser (_init_passes) and one __getstate__
    epochs        every pass is an epoch, agreed by the workers through shared memory;
                  WorkerBoard: the workers' loaded counts, shared between them
    world         the rank and world size, resolved when a pass starts
    resume        state_dict / load_state_dict: a position in an epoch, resumed
    loop          loop_state: a training loop's position, in batches

    partition_owner   whether the readers or the framework around the loader split the data;
                  OwnedSplit: the world, plan and len() that ChunkSampler shares with them
    skip          skip_first_batches: a loader's first batches skipped unread
    stream        one pass's records: in order, through a shuffle buffer, or resumed

The arithmetic they rely on is pure and lives in the plan package (`ChunkPlan`).
"""
