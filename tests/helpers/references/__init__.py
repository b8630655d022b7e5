"""Independent references and their inputs: the parity gates' each-sequence-alone results, packed and one-document
rows, the GRPO replay and hand-written loss, CPU stand-ins for GPU kernels and the ring's math in threads."""
