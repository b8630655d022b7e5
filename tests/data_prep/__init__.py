"""Data preparation (data_prep/): tokenizing, packing, the prepared manifest, chat templates, a user's own data."""
