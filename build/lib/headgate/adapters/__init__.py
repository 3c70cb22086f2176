"""Store adapters: one per database, each behind headgate.store.Store."""
