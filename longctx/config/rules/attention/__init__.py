"""Rules about attention under SP: attention patterns a family declares, head shapes, document isolation, linear
attention, and the hybrid Ulysses x ring mesh."""
