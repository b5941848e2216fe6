"""Share-group coordinator: membership over ShareGroupHeartbeat, the SimpleAssignor,
group configs, and the ShareGroup* records it keeps in ``__consumer_offsets``.

Import from the modules: ``share_group`` (the coordinator, one per ``__consumer_offsets``
partition), ``share_state`` (ShareGroupStatePartitionMetadata bookkeeping), ``assignor``,
``configs``, ``broker_defaults``, ``records``, ``topics``; and for the I/O around them
``offsets_topic`` (the internal topic and its batches), ``loader`` (replaying a partition)
and ``runtime`` (shards, writes, loading, timers, share-state initialisation).
"""
