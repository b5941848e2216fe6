"""Share-group coordinator: membership over ShareGroupHeartbeat, the SimpleAssignor,
group configs, and the ShareGroup* records it keeps in ``__consumer_offsets``.

Import from the modules: ``share_group`` (the coordinator), ``assignor``, ``configs``,
``broker_defaults``, ``records``, ``topics``.
"""
