"""Resume: mid-epoch and elastic resumes of the readers, resumed conversions (their child
scripts beside them)."""
