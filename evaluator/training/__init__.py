"""Training: an approach (a bundle of kind `approach`) trained on a test set's training split
becomes a frozen system, stored content-addressed and evaluated like any submission."""
