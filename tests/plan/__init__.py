"""The memory and step-time plan, the catalog it prices, and the one-GPU recipes it chooses."""
