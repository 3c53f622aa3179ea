"""The definitions of ``lg_put``, the PL/pgSQL function a LangGraph put runs, as the
migrations that created or replaced it wrote them (``migrations.py`` applies them)."""

from __future__ import annotations

LG_PUT = """
    CREATE{replace} FUNCTION lg_put(
        p_thread TEXT, p_ns TEXT, p_id TEXT, p_run TEXT, p_metadata JSONB,
        p_channels TEXT[], p_versions TEXT[], p_body BYTEA, p_body_size INT, p_body_sha256 BYTEA,
        b_channel TEXT[], b_version TEXT[], b_type TEXT[], b_data BYTEA[], b_size INT[],
        b_sha256 BYTEA[], r_channel TEXT[], r_version TEXT[], p_ttl FLOAT8{witness_args}
    ) RETURNS TABLE (out_seq BIGINT, out_missing TEXT[]) LANGUAGE plpgsql AS $$
    DECLARE
        v_seq BIGINT;
        v_missing TEXT[];
    BEGIN
        -- VOLATILE: each statement below takes its snapshot after the lock is granted, so
        -- it sees whatever a prune or gc of this thread committed while the put waited.
        PERFORM pg_advisory_xact_lock_shared(7104355, hashtext(p_thread));
{check}        IF v_missing IS NOT NULL THEN
            RETURN QUERY SELECT NULL::BIGINT, v_missing;
            RETURN;
        END IF;
        INSERT INTO lg_blobs (thread_id, checkpoint_ns, channel, version, type, data, size, sha256)
        SELECT p_thread, p_ns, b.channel, b.version, b.type, b.data, b.size, b.sha256
        FROM unnest(b_channel, b_version, b_type, b_data, b_size, b_sha256)
            AS b(channel, version, type, data, size, sha256)
        ON CONFLICT DO NOTHING;
        INSERT INTO lg_checkpoints AS c (thread_id, checkpoint_ns, checkpoint_id, run_id,
            metadata, channels, versions, body, body_size, body_sha256)
        VALUES (p_thread, p_ns, p_id, p_run, p_metadata, p_channels, p_versions, p_body,
            p_body_size, p_body_sha256)
        ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
            seq = nextval('lg_checkpoint_seq'), run_id = EXCLUDED.run_id,
            metadata = EXCLUDED.metadata, channels = EXCLUDED.channels,
            versions = EXCLUDED.versions, body = EXCLUDED.body, body_size = EXCLUDED.body_size,
            body_sha256 = EXCLUDED.body_sha256, created_at = now()
        RETURNING c.seq INTO v_seq;
        IF p_ttl IS NULL THEN
            UPDATE lg_threads t SET expires_at = now() + make_interval(secs => t.ttl_seconds)
            WHERE t.thread_id = p_thread AND t.ttl_seconds IS NOT NULL;
        ELSE
            INSERT INTO lg_threads AS t (thread_id, expires_at)
            VALUES (p_thread, now() + make_interval(secs => p_ttl))
            ON CONFLICT (thread_id) DO UPDATE
            SET expires_at = now() + make_interval(secs => COALESCE(t.ttl_seconds, p_ttl));
        END IF;
        RETURN QUERY SELECT v_seq, ARRAY[]::TEXT[];
    END
    $$;
"""
"""``lg_put`` (migration 5), with its check of the channel versions a checkpoint only names
left as ``{check}``: the check is what migration 11 replaced."""

NAMED_CHECK_V5 = """
        SELECT array_agg(r.channel) INTO v_missing
        FROM unnest(r_channel, r_version) AS r(channel, version)
        WHERE NOT EXISTS (
            SELECT 1 FROM lg_blobs o WHERE o.thread_id = p_thread AND o.checkpoint_ns = p_ns
            AND o.channel = r.channel AND o.version = r.version);
"""
NAMED_CHECK_V11 = """
        -- one index probe per channel the checkpoint only names, whatever the plan cache
        -- holds: a LATERAL ... LIMIT 1 cannot become a scan of the thread's every blob
        SELECT array_agg(r.channel) INTO v_missing
        FROM unnest(r_channel, r_version) AS r(channel, version)
        LEFT JOIN LATERAL (
            SELECT 1 AS found FROM lg_blobs o WHERE o.thread_id = p_thread
            AND o.checkpoint_ns = p_ns AND o.channel = r.channel AND o.version = r.version
            LIMIT 1) f ON TRUE
        WHERE f.found IS NULL;
"""


WITNESS_ARGS = ",\n        p_witness TEXT, p_witness_seq BIGINT"
WITNESSED_CHECK_V14 = (
    """
        -- the caller names a checkpoint it wrote or read (id and seq: an overwritten row
        -- has a new seq) that names every channel version this one only names; while
        -- that row is stored, so are they (retention deletes only blobs no checkpoint
        -- names), and one primary-key probe stands for a probe per channel
        IF p_witness IS NULL OR NOT EXISTS (
            SELECT 1 FROM lg_checkpoints w WHERE w.thread_id = p_thread
            AND w.checkpoint_ns = p_ns AND w.checkpoint_id = p_witness
            AND w.seq = p_witness_seq) THEN
"""
    + "\n".join(
        "    " + line if line else line for line in NAMED_CHECK_V11.removeprefix("\n").split("\n")
    )
    + """        END IF;
"""
)


def lg_put(replace: bool, check: str, witness: bool = False) -> str:
    """``lg_put``'s definition with ``check``; ``CREATE OR REPLACE`` when ``replace``;
    ``witness``: the overload that also takes the caller's witness checkpoint."""
    return (
        LG_PUT.removeprefix("\n")
        .replace("{replace}", " OR REPLACE" if replace else "", 1)
        .replace("{witness_args}", WITNESS_ARGS if witness else "", 1)
        .replace("{check}", check.removeprefix("\n"), 1)
    )
