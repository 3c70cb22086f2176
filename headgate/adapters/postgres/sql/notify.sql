-- LISTEN/NOTIFY (notify.py). {channel}: notify.CHANNEL or FINISHED_CHANNEL, constant
-- identifiers (LISTEN takes no parameter).

-- name: listen
LISTEN {channel}

-- name: notify
-- A change made outside an enqueue, sent from the notifier's own connection.
SELECT pg_notify(%s, %s)
