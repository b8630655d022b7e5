"""Resume and preemption: checkpoint folders as a save leaves them, the probed entrypoints that record, kill or
signal a run, and the launches that compare a resumed run with an uninterrupted one."""
