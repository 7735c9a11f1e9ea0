-- The memory index in the Gateway store's PostgreSQL database, in its own schema.
-- A generation is one complete build of the index with one identity; `live` names the one
-- searches read. A reindex fills a new generation and switches `live` in one transaction.
CREATE TABLE gatehouse_memory.generations (
    generation BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- embedder|model|dimensions|chunking, as the SQLite file's `meta` keeps it.
    identity TEXT NOT NULL
);

CREATE TABLE gatehouse_memory.live (
    only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
    generation BIGINT NOT NULL REFERENCES gatehouse_memory.generations (generation)
);

CREATE TABLE gatehouse_memory.files (
    generation BIGINT NOT NULL REFERENCES gatehouse_memory.generations (generation) ON DELETE CASCADE,
    path TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (generation, path)
);

CREATE TABLE gatehouse_memory.chunks (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    generation BIGINT NOT NULL REFERENCES gatehouse_memory.generations (generation) ON DELETE CASCADE,
    path TEXT NOT NULL,
    start_line BIGINT NOT NULL,
    end_line BIGINT NOT NULL,
    text TEXT NOT NULL,
    -- The distinct terms of `text` (the memory crate's unicode61 rules), and how many terms
    -- it has in all: BM25's document length.
    terms TEXT[] NOT NULL,
    length BIGINT NOT NULL,
    -- Little-endian f32, as in the SQLite file; NULL without a vector.
    embedding BYTEA,
    tsv TSVECTOR GENERATED ALWAYS AS (array_to_tsvector(terms)) STORED
);

CREATE INDEX chunks_tsv ON gatehouse_memory.chunks USING GIN (tsv);
CREATE INDEX chunks_by_path ON gatehouse_memory.chunks (generation, path);
