package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/sluicehq/sluice/client"
)

// sluiceURL and sluiceRootKey are the address and a root key of your Sluice
// server, e.g. "https://sluice.internal:7070". (Here the tests start one.)
var sluiceURL, sluiceRootKey string

// A denial is a response whose Success is false, not an error.
func Example() {
	c, err := client.New(sluiceURL, sluiceRootKey)
	if err != nil {
		log.Fatal(err)
	}
	defer c.CloseIdleConnections()

	for range 4 {
		res, err := c.Limit(context.Background(), client.LimitRequest{
			Namespace:  "example.api",
			Identifier: "user-42",
			Limit:      3,
			Duration:   time.Minute,
			Cost:       1, // 0 peeks
		})
		if err != nil {
			log.Fatal(err) // no answer, or the API refused the request
		}
		fmt.Println(res.Success, res.Remaining)
	}
	// Output:
	// true 2
	// true 1
	// true 0
	// false 0
}

// ListOverrides walks every page; a loop that breaks fetches no more.
func ExampleClient_ListOverrides() {
	c, err := client.New(sluiceURL, sluiceRootKey, client.WithPageSize(2))
	if err != nil {
		log.Fatal(err)
	}
	defer c.CloseIdleConnections()
	ctx := context.Background()

	for i, id := range []string{"premium_*", "user-7", "*_admin"} {
		o := client.Override{Identifier: id, Limit: int64(100 * (i + 1)), Duration: time.Minute}
		if _, err := c.SetOverride(ctx, "example.overrides", o); err != nil {
			log.Fatal(err)
		}
	}
	for o, err := range c.ListOverrides(ctx, "example.overrides") {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(o.Identifier, o.Limit, o.Duration)
	}
	// Output:
	// *_admin 300 1m0s
	// premium_* 100 1m0s
	// user-7 200 1m0s
}

// The API's refusals are *APIError values; ErrNotFound and ErrUnauthorized
// match the common ones.
func ExampleAPIError() {
	c, err := client.New(sluiceURL, sluiceRootKey)
	if err != nil {
		log.Fatal(err)
	}
	defer c.CloseIdleConnections()

	_, err = c.GetOverride(context.Background(), "example.none", "user-42")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Type == client.TypeNamespaceNotFound, apiErr.RequestID != "")
	}
	// Output:
	// true
	// 404 true true
}
