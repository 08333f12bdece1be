"""Curriculum: ready-made sequence selectors, the length bandit, the mixture bandit over
sources and the contract of online schedules with the training loop."""
