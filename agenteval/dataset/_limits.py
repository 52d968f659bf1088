"""How much text ``generate`` reads and ``run --corpus`` loads: the limits, in one place, because they fit together
(the corpus ``generate`` writes from documents within its default total passes ``run``'s default limit)."""

MAX_DOCUMENT_BYTES = 10_000_000
"""The most a document may hold: about 8,000 passages, several long books (War and Peace is 3.3 MB). A larger
file (a log, a database dump named .txt) is refused by name rather than read whole into memory, split, and put
whole in the corpus the search tool loads."""
MAX_TOTAL_MB = 100
"""The most the documents ``generate`` reads may hold together, in MB, unless ``--max-total-mb`` says otherwise:
about 80,000 passages. Checked from the files' sizes before any is read: a folder of thousands of large files was
read whole, into memory and the corpus."""
