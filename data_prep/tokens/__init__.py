"""Token ids and assistant masks: the recipe's fast tokenizer over batches of documents, and masks from ids alone."""
