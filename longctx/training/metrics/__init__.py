"""What a run reports about itself: throughput, MFU and HFU from FLOPs counted on what really runs, peak memory,
and which optimizer really steps."""
