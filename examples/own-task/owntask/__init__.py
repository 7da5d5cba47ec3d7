"""Two tasks that are not a classifier's, for trainjobs: a regression on dict batches with a
declared `mae`, and a masked sequence model with a token-weighted (sum, count) loss."""
