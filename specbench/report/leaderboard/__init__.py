"""Methods compared the way the field's leaderboards compare them (issue 43 item 4): method_table.py builds the
methods × categories table (speedup and #MAT per draft and Spec-Bench category or task, with intervals) that
`make bench-methods` prints and writes and `specbench report --by category` draws. A package of its own so that
report/ stays within the module count a newcomer can hold in mind (tests/test_layers.py)."""
