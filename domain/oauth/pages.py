"""The authorization server's two pages: sign-in-and-consent, and the error a
user sees when a request cannot be sent back to its client. Plain HTML forms,
no JavaScript; every value from the request is escaped."""

from __future__ import annotations

from html import escape
from urllib.parse import urlsplit

from domain.oauth.server import SCOPE_WORDS, AuthorizationRequest

_STYLE = """
body{font:16px/1.45 system-ui,sans-serif;background:#f4f5f7;color:#1d2330;margin:0}
main{max-width:30rem;margin:3rem auto;background:#fff;border-radius:10px;padding:2rem;
box-shadow:0 1px 4px #0002}
h1{font-size:1.35rem;margin:0 0 1rem}
.who{background:#eef3ff;border-radius:6px;padding:.75rem 1rem;margin:0 0 1rem}
.warn{background:#fff4e0;border-radius:6px;padding:.75rem 1rem}
.error{background:#fde8e8;color:#8a1c1c;border-radius:6px;padding:.75rem 1rem}
.who p{margin:0}
ul{padding-left:1.2rem} code{font-size:.9em;overflow-wrap:anywhere}
label{display:block;font-weight:600;margin:1rem 0 .3rem}
input[type=password]{width:100%;box-sizing:border-box;padding:.55rem;font-size:1rem;
border:1px solid #99a;border-radius:6px}
.buttons{display:flex;flex-direction:row-reverse;gap:.75rem;margin-top:1.25rem}
button{flex:1;padding:.65rem;font-size:1rem;border-radius:6px;border:1px solid #99a;
background:#fff;cursor:pointer}
button[value=allow]{background:#2656d9;color:#fff;border-color:#2656d9}
small{color:#555}
"""


def consent(request: AuthorizationRequest, *, csrf: str, error: str | None = None) -> str:
    client = request.client
    name = escape(client.name or "An application without a name")
    if client.host is not None:
        vouch = (f"Its identity is published at <code>{escape(client.client_id)}</code>, "
                 f"on <strong>{escape(client.host)}</strong>.")
    else:
        vouch = ("Kalends has not verified this name: the application registered itself "
                 f"(client <code>{escape(client.client_id)}</code>).")
    redirect = urlsplit(request.redirect_uri)
    where = escape(request.redirect_uri)
    local = redirect.hostname in ("127.0.0.1", "localhost", "::1")
    destination = (
        f'<p class="warn">After you answer, you go back to <code>{where}</code>: an '
        "application running on this computer. Allow only if you started it.</p>"
        if local else f"<p>After you answer, you go back to <code>{where}</code>.</p>")
    scopes = "".join(f"<li><strong>{escape(s)}</strong>: {escape(SCOPE_WORDS[s])}</li>"
                      for s in request.scopes)
    hidden = "".join(f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">'
                     for k, v in request.form().items())
    problem = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    return _page("Allow access to Kalends?", f"""
<h1>{name} wants to use your Kalends account</h1>
<div class="who"><p>{vouch}</p></div>
<p>It asks to:</p>
<ul>{scopes}</ul>
{destination}
{problem}
<form method="post" action="/oauth/authorize">
{hidden}
<input type="hidden" name="csrf" value="{escape(csrf)}">
<label for="api_key">Your Kalends API key</label>
<input type="password" id="api_key" name="api_key" autocomplete="off" required>
<small>It proves who you are and is not kept; the application never sees it.
Your Kalends administrator gives you one (<code>kalends admin create-key</code>).</small>
<div class="buttons">
<!-- Allow first: Enter in the key field submits with the form's first button. -->
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" formnovalidate>Deny</button>
</div>
</form>""")


def failure(description: str) -> str:
    return _page("Sign-in request refused", f"""
<h1>This sign-in request cannot continue</h1>
<p class="error" role="alert">{escape(description)}</p>
<p>Nothing was sent back to the application. Start again from the application.</p>""")


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title><style>{_STYLE}</style></head>
<body><main>{body}</main></body></html>"""
