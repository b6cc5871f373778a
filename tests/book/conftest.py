"""Book tests: each derives a worked answer of *How to Scale Your Model* with symcost and compares it with
the book's number at the book's tolerance (ids match the book's worked-answer list)."""
