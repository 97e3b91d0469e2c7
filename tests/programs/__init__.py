"""Whole programs against eager: the paper's examples, the long tail of Python idioms, the
random-program fuzzer's sample and finds, and the corpus compared with torch.compile."""
