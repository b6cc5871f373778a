"""The documents: every example's output, the architecture the documents describe."""
