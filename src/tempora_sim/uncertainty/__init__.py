"""How sure an answer is: the bootstrap over batches and seeds, the traces' timing variability and its replicates, the intervals of every term and their coverage of live runs."""
