"""One router per endpoint group: models, chat, completions, observability."""
