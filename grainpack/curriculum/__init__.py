"""Curriculum: ready-made sequence selectors, the length bandit and the contract of online
schedules with the training loop."""
