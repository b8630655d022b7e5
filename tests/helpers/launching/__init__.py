"""How tests start processes and share what they launch: `accelerate launch`, make, a gloo world by hand, the
warm zygote, the session's run cache, xdist groups and outcome rows, and what a launch must show or hide."""
