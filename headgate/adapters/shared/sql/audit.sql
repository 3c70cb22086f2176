-- The audit log of operator actions (audit.py).

-- name: insert
INSERT INTO audit_log (at_ms, actor, action, target, status, outcome, detail)
VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING {columns}

-- name: page
-- Newest first by id; {where}: "" or " WHERE " and audit.page's clauses (literal
-- columns and placeholders).
SELECT {columns} FROM audit_log{where} ORDER BY id DESC LIMIT ?

-- name: prune
DELETE FROM audit_log WHERE id IN (
    SELECT id FROM audit_log WHERE at_ms < ? ORDER BY at_ms LIMIT ?)
