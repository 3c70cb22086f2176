-- Job pages (job_pages.py): keyset pages over the indexes, newest first.

-- name: first_prefix_kind
-- SQLite pages a kind prefix one kind at a time (job_pages.py): the matching kinds, one
-- jobs_kind_id probe each, in binary order.
SELECT kind FROM jobs WHERE kind >= ? AND kind < ? || char(1114111) ORDER BY kind LIMIT 1

-- name: next_prefix_kind
SELECT kind FROM jobs WHERE kind > ? AND kind < ? || char(1114111) ORDER BY kind LIMIT 1

-- name: occupied
-- The (queue, state) pairs holding jobs, from the maintained counters; {where}: " AND
-- queue = ?" for one queue, else "".
SELECT queue, state FROM queue_counts WHERE n > 0 AND state IN ({marks}){where}
ORDER BY queue, state

-- name: page
-- {columns}: rows.JOB_COLUMNS or JOB_COLUMNS_WITH_PAYLOAD; {where}: "" or " WHERE " and
-- the filter's clauses (literal columns, dialect tests and placeholders).
SELECT {columns} FROM jobs{where} ORDER BY id DESC LIMIT ?

-- name: walk_end
-- Where a page that tests jobs along an index stops (job_pages.py): the id SCAN_LIMIT
-- jobs down that index; {where} as for `page`, the clauses the index answers.
SELECT id FROM jobs{where} ORDER BY id DESC LIMIT 1 OFFSET ?
