"""The launch path and the test plumbing: the launch home, the zygote, Slurm, process markers, patches, secrets."""
