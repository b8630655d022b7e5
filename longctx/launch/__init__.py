"""What `make sft` runs after preflight: resolve the recipe's accelerate YAML and exec the launch line."""
