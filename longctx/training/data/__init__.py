"""The prepared rows data_prep wrote, loaded through their manifest and collated into the tensors the SP adapter
shards."""
