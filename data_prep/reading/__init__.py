"""Raw rows in: Hub datasets and local files (jsonl, json, parquet, arrow) read one at a time, each row checked
against its format, and a user's own --input."""
