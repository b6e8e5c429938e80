"""The app catalog: one JSON definition per app (`definitions/<slug>.json`), validated by `schema`, cached in the
`catalog_apps` table by `loader.ingest_definitions` (`switchboard catalog ingest`) and read at runtime from there."""
