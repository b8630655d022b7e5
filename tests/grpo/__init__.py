"""Online RL (GRPO): its data, generation, group layout, loss, rewards, rules, plan and resume."""
