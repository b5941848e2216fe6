"""Share coordinator: the durable state of share-partitions in ``__share_group_state``.

``shard.ShareCoordinatorShard`` is the pure per-partition state machine, ``combiner`` folds
state batches, ``routing`` maps a share-partition to its ``__share_group_state`` partition.
"""
