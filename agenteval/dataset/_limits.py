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
MAX_CORPUS_MB = 200
"""The most a corpus file (``run --corpus``) may hold, in MB, unless ``--max-corpus-mb`` says otherwise. Its
passages and their search index are held in memory by each process that runs trials, about 4 times the file's size
at their peak, and indexed before the run starts (docs/performance.md has the figures). Twice what ``generate``
reads by default, so the corpus it writes (the passages, with their ids and JSON quoting) passes."""
MAX_PASSAGE_CHARS = 100_000
"""The most characters a corpus document's text may have: a search result goes whole into the agent's prompt, and
three of this size are about 75,000 tokens. ``generate``'s passages hold about 1,200."""
