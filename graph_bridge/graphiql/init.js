// Kalends: starts GraphiQL on the page graph/ide.py serves at GET /graphql.
// A file of its own: the page's Content-Security-Policy allows no inline script.
// No credential here: the user types the Authorization header in the headers
// editor, and headers never reach localStorage (see `storage` below).
(function () {
  "use strict";
  var placeholder = "Bearer kal_...";
  var hint = JSON.stringify({ Authorization: placeholder }, null, 2);
  var query =
    "# Kalends GraphQL: put your API key in Headers below,\n" +
    "# then run with Ctrl-Enter.\n\n" +
    "{\n  organizations {\n    data {\n      id\n      name\n      role\n    }\n  }\n}\n";
  // GraphiQL keeps its tabs, history and favourites in localStorage; with
  // shouldPersistHeaders off it leaves the tabs' headers out, but not those of
  // history and favourites (GraphiQL 3.8): their "headers" fields are blanked
  // on the way there, so the API key stays in memory only (a history item
  // chosen after a reload then asks for the key again).
  var withHeaders = ["graphiql:queries", "graphiql:favorites", "graphiql:tabState"];
  var storage = {
    getItem: function (key) { return localStorage.getItem(key); },
    setItem: function (key, value) {
      localStorage.setItem(key, withHeaders.indexOf(key) < 0 ? value : withoutHeaders(value));
    },
    removeItem: function (key) { localStorage.removeItem(key); },
    clear: function () { ours().forEach(function (key) { localStorage.removeItem(key); }); },
    get length() { return ours().length; },
  };

  function ours() {
    return Object.keys(localStorage).filter(function (key) {
      return key.indexOf("graphiql:") === 0;
    });
  }

  function withoutHeaders(value) {
    try {
      return JSON.stringify(JSON.parse(value), function (key, field) {
        return key === "headers" ? null : field;
      });
    } catch (notJson) {
      return value;
    }
  }

  var root = ReactDOM.createRoot(document.getElementById("graphiql"));
  var introspectedWith = hint;
  var pending = null;

  function render() {
    // The page is served by the endpoint itself: queries go back to its path,
    // subscriptions over a WebSocket to it, with the graphql-ws client GraphiQL's
    // bundle carries; that client sends the headers editor's headers as
    // connection_init's payload, where the service reads Authorization.
    // A new fetcher also makes GraphiQL fetch the schema again, with the
    // headers then in its editor.
    var fetcher = GraphiQL.createFetcher({
      url: window.location.pathname,
      subscriptionUrl: socketUrl(),
    });
    root.render(React.createElement(GraphiQL, {
      fetcher: fetcher,
      // No schema (null: none fetched) until a key is typed: asked for with the
      // placeholder, it would only show the service refusing it.
      schema: keyTyped(introspectedWith) ? undefined : null,
      defaultQuery: query,
      defaultHeaders: hint,
      isHeadersEditorEnabled: true,
      shouldPersistHeaders: false,
      storage: storage,
      defaultEditorToolsVisibility: "headers",
      onEditHeaders: headersEdited,
    }));
  }

  function socketUrl() {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + window.location.pathname;
  }

  function keyTyped(text) {
    var headers;
    try {
      headers = JSON.parse(text);
    } catch (notJson) {
      return false;
    }
    return Boolean(headers) && typeof headers === "object" && Object.keys(headers).some(
      function (name) {
        var value = headers[name];
        return name.toLowerCase() === "authorization" && typeof value === "string" &&
          value.trim() !== "" && value.trim() !== placeholder;
      });
  }

  // The schema (docs, completion) needs the key: fetch it again once the
  // headers typed are complete JSON and have changed.
  function headersEdited(text) {
    clearTimeout(pending);
    pending = setTimeout(function () {
      if (text === introspectedWith) return;
      try {
        JSON.parse(text);
      } catch (stillTyping) {
        return;
      }
      introspectedWith = text;
      render();
    }, 500);
  }

  render();
})();
