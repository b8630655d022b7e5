"""Documents into rows: the first pass's token store, best-fit-decreasing packing, the padding rule and the rows built
from packed bins."""
