-- Schema version 5 of the PostgreSQL rail: who follows a task's events (extension `follow`).
-- One row per tracker instance with a follower, kept alive while it follows (the server's clock,
-- not a host's). A write sends the follow channel's NOTIFY only while a live row exists, so a
-- rail nobody follows pays one index probe per write and no NOTIFY (tracker_client/postgres/follow.py).
CREATE TABLE followers (
    instance TEXT PRIMARY KEY NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
CREATE INDEX followers_expires ON followers (expires_at);
