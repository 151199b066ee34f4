package callout

import "encoding/json"

// errorTypes mirrors services/openai_errors.py so a client sees the same error shape whether
// the kit's Python services or this filter answered.
var errorTypes = map[int]string{
	400: "BadRequestError",
	404: "NotFoundError",
	408: "TimeoutError",
	413: "BadRequestError",
	415: "BadRequestError",
	422: "BadRequestError",
	429: "RateLimitError",
	500: "InternalServerError",
	502: "BadGatewayError",
	503: "ServiceUnavailableError",
	504: "TimeoutError",
}

type openAIError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// ErrorBody is an OpenAI-style error: {"error": {"message", "type", "param", "code"}}; code is
// the status or a string such as "callout_unavailable", as services/openai_errors.py allows.
func ErrorBody(status int, message string, code any) []byte {
	t, ok := errorTypes[status]
	if !ok {
		if status >= 500 {
			t = "InternalServerError"
		} else {
			t = "BadRequestError"
		}
	}
	b, _ := json.Marshal(map[string]openAIError{"error": {Message: message, Type: t, Code: code}})
	return b
}
