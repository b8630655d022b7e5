"""What a prep writes and reports: the dataset folder written atomically, the counts and the report, the work balance,
the plot, progress and the check of what was written."""
