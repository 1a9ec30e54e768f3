-- instance_secrets are sealed with the service key (docs/api-choices.md, "Connected calendars"),
-- as every other secret is, so that a backup carries none of them in clear. The database never
-- holds that key: the service seals the rows still in clear when it first reads
-- them (db/secrets.py), keeping their values. Until then a row says it is in clear.
ALTER TABLE instance_secrets ADD COLUMN sealed boolean NOT NULL DEFAULT false;
-- Every row written from now on says which it is.
ALTER TABLE instance_secrets ALTER COLUMN sealed DROP DEFAULT;
