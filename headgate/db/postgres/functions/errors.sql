-- Error-history helpers the admission function writes with, in the same JSON shape as
-- headgate/adapters/shared/rows.py (append_error, error_entry); their limits are
-- generated from headgate/core/schema_constants.py (headgate/adapters/migrations.py).

-- rows.append_error: the entry appended, the newest headgate_max_errors_kept() kept. Existing entries keep their
-- text (json, not jsonb), so the array reads as Python's json.dumps wrote it.
CREATE OR REPLACE FUNCTION headgate_append_error(p_errors TEXT, p_entry TEXT) RETURNS TEXT
LANGUAGE sql IMMUTABLE AS $$
    SELECT '[' || string_agg(e, ', ' ORDER BY i) || ']'
    FROM (
        SELECT e, i FROM (
            SELECT t.e::text AS e, t.i FROM json_array_elements(p_errors::json)
                WITH ORDINALITY AS t(e, i)
            UNION ALL SELECT p_entry, 9223372036854775807
        ) AS every_entry ORDER BY i DESC LIMIT headgate_max_errors_kept()
    ) AS kept
$$;

-- rows.error_entry for the admission's own cancellations (attempt 0, no worker, no logs).
CREATE OR REPLACE FUNCTION headgate_cancel_entry(p_now BIGINT, p_reason TEXT, p_outcome TEXT)
RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT format('{"attempt": 0, "at_ms": %s, "error": %s, "logs": [], "worker": null, '
                  '"outcome": %s}', p_now,
                  to_json(left(p_reason, headgate_error_text_max_chars()::integer))::text,
                  to_json(p_outcome)::text)
$$;
