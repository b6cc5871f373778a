"""Output formats: LaTeX (and Markdown) derivation documents."""
