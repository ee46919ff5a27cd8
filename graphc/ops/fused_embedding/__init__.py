"""fused_embedding_seq_pool: the lookups of several LoD slots in one table, sum-pooled per
sequence, as one gather and one segment sum (made by the fuse-embedding-seq-pool pass)."""
