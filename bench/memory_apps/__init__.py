"""Worker apps that only the memory benchmarks start (``bench/child_heap.py``)."""
