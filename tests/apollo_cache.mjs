// Reads Kalends through Apollo Client 4 with a given InMemoryCache, so that
// tests/graph/test_apollo_cache.py can check the cache settings docs/graphql.md ("Client
// caches") gives: what the cache keeps, and every warning Apollo gives meanwhile.
//
// Run from a folder beside (or under) the node_modules that holds @apollo/client, with
// the development build (its warnings are left out of the production one):
//   node --conditions=development apollo_cache.mjs        JSON on stdin, JSON on stdout
// Input:  {"url": "<service base URL>", "key": "<API key>", "cache": "<module exporting cache>",
//          "event_id": "evt_...", "profile_id": "prf_..."}
// Output: {"warnings": ["<message>", ...],
//          "stats": <StatsA read back from the cache after StatsB, or null>,
//          "page": <PageA read back after PageB, or null>,
//          "appended": [<ids Discover reads back after its two pages>]}

import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import { format } from "node:util";

import { ApolloClient, HttpLink, gql } from "@apollo/client";

const input = JSON.parse(readFileSync(0, "utf8"));
const warnings = [];
for (const level of ["warn", "error"]) {
  console[level] = (...args) => warnings.push(format(...args));
}

const { cache } = await import(pathToFileURL(input.cache).href);
const client = new ApolloClient({
  cache,
  link: new HttpLink({
    uri: `${input.url}/graphql`,
    headers: { Authorization: `Bearer ${input.key}` },
  }),
});

// One event read by two documents that select its rsvp_stats differently.
const STATS_A = gql`query StatsA($id: ID!) {
  event(event_id: $id) { id title rsvp_stats { event_id going total_attendees } } }`;
const STATS_B = gql`query StatsB($id: ID!) {
  event(event_id: $id) { id rsvp_stats { event_id waitlist } } }`;

// One page (the same field and arguments) read by two documents.
const PAGE_A = gql`query PageA($p: ID!) {
  profile(profile_id: $p) { id events(limit: 2) { data { id title } has_more } } }`;
const PAGE_B = gql`query PageB($p: ID!) {
  profile(profile_id: $p) { id events(limit: 2) { data { id start_time } total_count } } }`;

// A list read page after page.
const DISCOVER = gql`query Discover($profiles: [ID!], $cursor: String) {
  events(limit: 1, cursor: $cursor, profile_ids: $profiles) {
    data { id title } has_more next_cursor } }`;

async function network(query, variables) {
  const { data } = await client.query({ query, variables, fetchPolicy: "network-only" });
  return data;
}

function kept(query, variables) {
  return client.readQuery({ query, variables }) ?? null;
}

const stats = { id: input.event_id };
await network(STATS_A, stats);
await network(STATS_B, stats);

const page = { p: input.profile_id };
await network(PAGE_A, page);
await network(PAGE_B, page);

const profiles = { profiles: [input.profile_id] };
const first = await network(DISCOVER, profiles);
await network(DISCOVER, { ...profiles, cursor: first.events.next_cursor });
const list = kept(DISCOVER, profiles);

process.stdout.write(JSON.stringify({
  warnings,
  stats: kept(STATS_A, stats),
  page: kept(PAGE_A, page),
  appended: list === null ? [] : list.events.data.map((event) => event.id),
}) + "\n");
