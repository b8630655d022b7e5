"""Rules about a recipe's data: chat templates, the keys of a user's own data, prepared rows and their balance."""
