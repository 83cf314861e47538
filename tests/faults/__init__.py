"""Faults: kills, Ctrl-C, full disks, damaged datasets, resource limits, fuzzing, clean exits."""
