"""The SP machinery itself: hybrid Ulysses x ring attention, the gloo collectives, ZeRO under SP."""
